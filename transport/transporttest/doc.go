// Package transporttest runs transport.Servers in tests of other packages: a
// server over a Backend reached through a bufconn, a Unix socket or TCP on
// 127.0.0.1, with a Flight client connected to it, both stopped at cleanup;
// and the small checks such tests share (status codes, leaks, polling).
//
// Package transport's own tests have their own copies of these helpers
// (helpers_test.go): they cannot import this package without a cycle.
package transporttest
