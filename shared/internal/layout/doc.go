// Package layout holds the rules of the repository's layout, as tests.
// The import rule (layout_test.go): the library (shared/...) and everything else
// outside pipelines/, functions/, cmd/ and examples/ never imports the
// example pipelines (github.com/qasync/qasync/pipelines/...), directly or
// through a dependency, in its non-test or its test files. The examples
// are what this repository's binaries serve; a library user registers
// their own pipelines instead.
//
// The names are true (names_test.go): every package has one package
// comment, and it names the package; an error message that begins with a
// prefix ("dynamo: ...") names the package that makes it.
//
// The other half of the layout, that nothing outside shared/ imports
// shared/internal/..., is Go's internal-package rule: the go tool refuses
// such an import, so it needs no test of its own.
package layout
