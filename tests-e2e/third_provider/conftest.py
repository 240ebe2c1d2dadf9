"""The stand-in package's own tests run where it is installed: ``tests-e2e/test_third_provider.py``
installs it for a pytest process of its own and runs them there, by path (as ``.ci/run`` runs each
package alone). A plain ``pytest`` run does not collect them here."""

collect_ignore = ["tests"]
