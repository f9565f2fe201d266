// Package benchmarks holds end-to-end comparisons of meshfeed with the loaders
// users would otherwise pick. Micro-benchmarks live beside the code they measure.
package benchmarks
