// Package kleak holds the guest test that runs last on the debug kernel: a
// kmemleak scan that must find nothing.
package kleak
