"""``dsh demo``: the installed real products against their bundled loopback models.

``command`` is the entry point; ``plans`` finds the providers' demo plans, ``scenarios`` drives
them through the harness tools, ``jobs`` picks the executor, ``serve`` is ``dsh demo --serve``
and ``walk`` counts the product processes a demo caused.
"""
