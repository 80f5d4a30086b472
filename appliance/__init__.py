"""The klog appliance: a supervisor and one worker process per disk on one host."""
