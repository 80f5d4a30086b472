"""The `klog` command: the top floor; nothing imports it."""
