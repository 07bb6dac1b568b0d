package lua

import "slices"

// What the tests of package lua_test read of the package, which the
// library does not need.

// HelperFiles names the helper files, in the order MustBuild puts them in
// front of every script.
func HelperFiles() []string { return slices.Clone(helperFiles) }

// Library returns the name and code of s's function library.
func (s *Scripts) Library() (name, code string) { return s.lib.Name, s.lib.Code }
