// Package arch holds the module's layering rules, all of them, as the one
// test of this package: which packages may depend on which (read from
// `go list -deps -test`), and the shapes of the program's wiring that no
// behavioural test can see (read from the source). A rule broken here is a
// design decision undone; the decision records in docs/decisions say why
// each rule exists.
//
// Part of the test kit (one package per kind of part; docs/testing.md):
// a new layering rule goes here, not into the package it constrains.
package arch
