"""The framework-neutral core: config, the Group Generator and its service, process sets."""
