// Package codesize answers one question: does the repository's Go code stay
// readable by the sizes a newcomer can hold in mind?
//
// It holds no code, only a test that walks every non-test Go file of the
// module and fails on a file over [MaxFileLines] lines, a function over
// [MaxFuncLines] lines whose doc comment gives no reason (a paragraph that
// starts with "Length:"), or a function of the decode path (packages loader
// and format) with more than [MaxDecodeParams] parameters.
package codesize

// The limits the test holds the code to.
const (
	MaxFileLines    = 600
	MaxFuncLines    = 80
	MaxDecodeParams = 6
)
