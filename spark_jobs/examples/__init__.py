"""Layer 6, example data: generators of input changes for the example circuits and the benchmarks."""
