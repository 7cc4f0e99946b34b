"""One vocabulary for building test inputs: quota trees, workload events, hand-written logs and
generated engine histories. Tests import builders from here, never from another test module;
nothing here starts a server, reads the clock or asserts."""
