// Package layout holds the import rule of the repository's layout, as a
// test (layout_test.go): the library (shared/...) and everything else
// outside pipelines/, functions/, cmd/ and examples/ never imports the
// example pipelines (github.com/qasync/qasync/pipelines/...), directly or
// through a dependency, in its non-test or its test files. The examples
// are what this repository's binaries serve; a library user registers
// their own pipelines instead.
//
// The other half of the layout, that nothing outside shared/ imports
// shared/internal/..., is Go's internal-package rule: the go tool refuses
// such an import, so it needs no test of its own.
package layout
