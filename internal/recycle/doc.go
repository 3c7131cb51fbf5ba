// Package recycle keeps values of one type for reuse: a typed sync.Pool.
//
// A Pool's Get returns a value that Put gave back, or a new one from New;
// Put gives a value back once nothing refers to it any more. The caller
// resets what it puts back (or what it gets): a Pool neither clears nor
// inspects values. As with sync.Pool, a value put back may be dropped at
// any garbage collection, so a Pool holds memory only while it is reused.
// Get and Put may be called from any goroutine; neither blocks on another
// caller nor orders anything between callers, which is why xds's
// connection core, which takes no lock, recycles its values through it.
package recycle
