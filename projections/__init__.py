"""Read models built from the event stream (runs, review inbox, knowledge, provenance, analytics).

What the views share: ``base`` (a view, its tracked transactions and batches, its spec),
``backends`` (SQLite and PostgreSQL), ``dialect`` (SQL per backend, column specs), ``paging``,
``times``, ``checks`` (query parameters) and ``dead_letters``.
"""
