"""``python -m gpustack_cli`` is the console script."""

from gpustack_cli.main import main

main()
