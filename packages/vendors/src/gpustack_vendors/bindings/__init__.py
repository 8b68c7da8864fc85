"""Our own ctypes bindings, for vendor libraries that ship no Python binding of their own."""
