"""Development tools shared by the tests and the benchmarks; never part of the product's wheel
or image. Nothing here imports the product, the benchmarks or the tests."""
