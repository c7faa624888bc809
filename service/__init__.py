"""autopar's service layer: the ``autopar`` command line now, the REST service and its storage later.

It imports ``search`` (and, later, ``profiler``); nothing in ``search`` imports it.
"""
