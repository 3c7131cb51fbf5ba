package xds

// CheckReplays makes s check every step a connection takes again from
// another connection's (a view's shared step) against the step its own
// diff would take, and call report with what differs. Call it before any
// stream opens.
func CheckReplays(s *Server, report func(msg string)) { s.set.ReplayCheck = report }
