package meshconfig

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// validateView checks the references of the resources in the scope of fleet
// ("" for global) against the view a node of that fleet sees: the global
// resources plus the fleet's own. Global resources are checked against the
// global scope alone, since nodes outside every fleet see nothing else; so
// a global resource can never depend on a fleet.
//
// Errors (the view is rejected):
//   - a Listener's HTTP connection manager names, through rds, a
//     RouteConfiguration the view lacks, or fails its own ValidateAll;
//   - a route (of a RouteConfiguration or of a listener's inline route
//     configuration) names a Cluster the view lacks, directly, through
//     weighted_clusters or as a mirror target.
//
// Warnings (the view is accepted): an EDS Cluster whose service name has no
// ClusterLoadAssignment (Envoy keeps such a cluster warming and gRPC reports
// it has no endpoints, until one arrives); an EDS or RDS config source that
// is neither ads nor self, which a client would not fetch from this server.
// Secret references are not checked.
func validateView(scopes map[string]scope, fleet string) (problems, warnings []Problem) {
	global, own := scopes[""], scopes[fleet]
	v := view{global: global, own: own, fleet: fleet}
	for _, t := range Types() {
		for _, r := range sortedByName(own[t], nil) {
			switch m := r.Message.(type) {
			case *listenerv3.Listener:
				p, w := v.checkListener(r, m)
				problems, warnings = append(problems, p...), append(warnings, w...)
			case *routev3.RouteConfiguration:
				problems = append(problems, v.checkRoutes(r, m, "")...)
			case *clusterv3.Cluster:
				warnings = append(warnings, v.checkCluster(r, m)...)
			}
		}
	}
	return problems, warnings
}

// view is the set of resources a node of one fleet sees.
type view struct {
	global, own scope
	fleet       string
}

// has reports whether the view holds a resource of typeURL named name.
func (v view) has(typeURL, name string) bool {
	return v.global.lookup(typeURL, name) != nil || v.own.lookup(typeURL, name) != nil
}

// where describes the view for messages.
func (v view) where() string {
	if v.fleet == "" {
		return "in the global files"
	}
	return fmt.Sprintf("in the global files or fleet %q", v.fleet)
}

// checkListener checks every HTTP connection manager of l: the api_listener
// one (proxyless gRPC) and those in the filter chains (Envoy).
func (v view) checkListener(r *Resource, l *listenerv3.Listener) (problems, warnings []Problem) {
	type located struct {
		at  string
		cfg *anypb.Any
	}
	var hcms []located
	if a := l.GetApiListener().GetApiListener(); a != nil {
		hcms = append(hcms, located{"api_listener", a})
	}
	chains := l.GetFilterChains()
	if d := l.GetDefaultFilterChain(); d != nil {
		chains = append(chains[:len(chains):len(chains)], d)
	}
	for i, fc := range chains {
		at := fmt.Sprintf("filter_chains[%d]", i)
		if i == len(l.GetFilterChains()) {
			at = "default_filter_chain"
		}
		for j, f := range fc.GetFilters() {
			if tc := f.GetTypedConfig(); tc != nil {
				hcms = append(hcms, located{fmt.Sprintf("%s.filters[%d]", at, j), tc})
			}
		}
	}
	for _, h := range hcms {
		if h.cfg.GetTypeUrl() != typeHCM {
			continue
		}
		var hcm hcmv3.HttpConnectionManager
		if err := h.cfg.UnmarshalTo(&hcm); err != nil {
			problems = append(problems, resourceProblem(r, "%s: %v", h.at, err))
			continue
		}
		if err := hcm.ValidateAll(); err != nil {
			problems = append(problems, resourceProblem(r, "%s: invalid HttpConnectionManager: %v", h.at, err))
			continue
		}
		if rds := hcm.GetRds(); rds != nil {
			name := rds.GetRouteConfigName()
			if !v.has(TypeRoute, name) {
				problems = append(problems, resourceProblem(r, "%s: rds.route_config_name %q: no RouteConfiguration of that name %s", h.at, name, v.where()))
			}
			if !servedHere(rds.GetConfigSource()) {
				warnings = append(warnings, resourceProblem(r, "%s: rds.config_source is neither ads nor self, so clients will not fetch %q from this server", h.at, name))
			}
		}
		if rc := hcm.GetRouteConfig(); rc != nil {
			problems = append(problems, v.checkRoutes(r, rc, h.at+": route_config: ")...)
		}
	}
	return problems, warnings
}

// checkRoutes checks that every cluster the routes of rc send to exists.
// prefix locates rc inside r when it is inline.
func (v view) checkRoutes(r *Resource, rc *routev3.RouteConfiguration, prefix string) []Problem {
	var problems []Problem
	check := func(cluster, at string) {
		if !v.has(TypeCluster, cluster) {
			problems = append(problems, resourceProblem(r, "%s%s: cluster %q: no Cluster of that name %s", prefix, at, cluster, v.where()))
		}
	}
	for _, vh := range rc.GetVirtualHosts() {
		for i, route := range vh.GetRoutes() {
			action := route.GetRoute()
			if action == nil {
				continue
			}
			at := fmt.Sprintf("virtual host %q route %d", vh.GetName(), i)
			if c := action.GetCluster(); c != "" {
				check(c, at)
			}
			for _, wc := range action.GetWeightedClusters().GetClusters() {
				check(wc.GetName(), at+" weighted_clusters")
			}
			for _, mp := range action.GetRequestMirrorPolicies() {
				if c := mp.GetCluster(); c != "" {
					check(c, at+" request_mirror_policies")
				}
			}
		}
	}
	return problems
}

// checkCluster returns warnings for an EDS cluster without endpoints or
// with endpoints served elsewhere.
func (v view) checkCluster(r *Resource, c *clusterv3.Cluster) []Problem {
	if c.GetType() != clusterv3.Cluster_EDS {
		return nil
	}
	var warnings []Problem
	eds := c.GetEdsClusterConfig()
	service := eds.GetServiceName()
	if service == "" {
		service = c.GetName()
	}
	if !v.has(TypeEndpoint, service) {
		warnings = append(warnings, resourceProblem(r, "EDS service %q: no ClusterLoadAssignment of that name %s; the cluster has no endpoints until one is added", service, v.where()))
	}
	if !servedHere(eds.GetEdsConfig()) {
		warnings = append(warnings, resourceProblem(r, "eds_cluster_config.eds_config is neither ads nor self, so clients will not fetch %q from this server", service))
	}
	return warnings
}

// servedHere reports whether a config source points a client back at the
// server it got the referring resource from (ads or self).
func servedHere(cs *corev3.ConfigSource) bool {
	return cs.GetAds() != nil || cs.GetSelf() != nil
}
