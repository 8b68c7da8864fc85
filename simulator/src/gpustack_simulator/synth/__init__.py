"""Synthetic vendor libraries: public facts turned into a binding the recorder can drive."""
