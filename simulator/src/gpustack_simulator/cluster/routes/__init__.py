"""One module per endpoint family; ``cluster.app`` composes them into one dispatcher."""
