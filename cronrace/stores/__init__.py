"""Stores: the contract every backend meets, its values, and the URL that picks one."""
