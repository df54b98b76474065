"""`python -m cdi.controller`: the same as the `cdi-controller` console script."""

from cdi.controller.handlers import main

main()
