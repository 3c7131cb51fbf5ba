// Package release checks that the public modules of this repository can
// be installed from outside it, as a user's go get installs them: from a
// module proxy, with no replace directive of theirs in effect (a
// dependency's replace directives are ignored).
//
// WriteProxy writes what a module proxy would serve for the modules at a
// version (the layout of GOPROXY=file://DIR: list, .info, .mod and .zip,
// the zip made with golang.org/x/mod/zip from the module's directory, so
// that it holds exactly what a module zip may: no nested module, no VCS
// directory). TestInstall builds such a proxy from the working tree at the
// version xds/xdsotel requires the root module at (the version about to be
// tagged), and, in a fresh module outside the repository with GOWORK=off,
// go gets each public module and builds a program that imports them.
//
// API lists the exported API of packages, one line per declaration, and
// TestAPI checks the public packages against api/xdspush.txt at the
// repository's root.
//
// The release procedure, which the README's "Versioning" section gives,
// keeps that check true: set the require of the root module in every
// public nested module to the version being released, run the check, then
// tag the root (vX.Y.Z) and each nested module (xds/xdsotel/vX.Y.Z) at the
// same commit.
package release
