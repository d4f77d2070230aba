"""The integration tests: a package, so that its conftest is not imported as
the top-level `conftest` module that tests/*.py import helpers from."""
