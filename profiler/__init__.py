"""Microbenchmarks that write a hardware profile; arrives in a later issue."""
