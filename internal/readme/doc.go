// Package readme holds the check that README.md's Go code compiles as
// written (readme_test.go): every ```go block is a whole program, built
// and vetted against this module.
package readme
