"""The framework-neutral core: config, group generation, the coordinator, process sets."""
