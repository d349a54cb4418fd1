// Package doctest holds the rules of the repository's documentation, as
// tests (doctest_test.go), over README.md and docs/*.md:
//
//   - every relative link resolves: to a file or directory of the
//     repository, and, into a Markdown file, to one of its headings (or an
//     <a id> anchor);
//   - every Go block compiles: the blocks of one page are laid out as a
//     module that requires qasync from this working tree (a replace
//     line), and `go vet` checks it (and `go test` runs it when the page
//     writes a test file); every Go block is gofmt'd.
//
// How a page's Go blocks are laid out is said by an HTML comment on the
// line before the block's fence (blank lines between are allowed):
//
//   - no comment, a block that starts with its package clause: a file of
//     that package (directory named after it); the first such package is
//     the page's snippet package;
//   - no comment, any other block: declarations of the page's snippet
//     package (package doc when the page has none), with the imports its
//     selectors name added from a fixed table (qasync's public packages
//     and the standard library's usual ones);
//   - <!-- doctest: func -->: statements, checked as a function body in
//     the snippet package;
//   - <!-- doctest: file PATH -->: the file PATH of the page's module
//     (go.mod too: the page then gives the module its path, and its
//     replace line for github.com/qasync/qasync is pointed at this
//     working tree). A later block with the same PATH replaces the file:
//     the module is checked as it stood before, then again at the end, so
//     each stage of a tutorial compiles;
//   - <!-- doctest: cdk -->: a CDK app (module infra/cdk's construct). Its
//     dependencies (the AWS CDK's Go bindings) take minutes to build and
//     are not in the root module, so such a block is parsed and gofmt'd,
//     every name it takes from infra/cdk/stack must exist there (with the
//     fields of its composite literals), and every other package and name
//     it uses must be used by infra/cdk or examples/invoices/infra, which
//     `make cdk-test` and `make examples-test` compile.
//
// Positions in the compiler's messages are the page's own lines (the
// laid-out files carry //line directives).
package doctest
