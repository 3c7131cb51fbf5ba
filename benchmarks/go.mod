module github.com/xdspush/xdspush/benchmarks

go 1.26.0

replace github.com/xdspush/xdspush => ../

require (
	github.com/xdspush/xdspush v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
	k8s.io/client-go v0.37.2
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	golang.org/x/time v0.16.0 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
)
