"""autopar's service layer: the ``autopar`` command line, the REST service (``api/``), its storage
and search queue (``store/``), the search worker, and the launch files of a ranked configuration
(``launch/``).

It imports ``search`` and ``profiler``; nothing in ``search`` imports it. Programs that only predict
or search use ``import autopar`` (the facade over ``search``) and never load this package.
"""
