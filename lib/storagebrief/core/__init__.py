"""The shared hall: config, targets, cgroups, cache, monitor, inventory, results, sweep."""
