// Package sortedset computes unions, differences and changes of sets of
// names held as sorted slices without duplicates, the form in which xds
// keeps subscriptions and xdstest's clients keep theirs. Each function
// walks its inputs once, in step, and never modifies them.
//
// Inputs must be sorted (slices.Sort) and hold each name once; the result
// for other inputs is unspecified. Results are sorted and unique too.
package sortedset
