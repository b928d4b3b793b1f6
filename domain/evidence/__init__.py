"""Evidence: the lineage graph behind a Dream request, and what the model may see.

Resolving a request walks its exact references (Sources, Experience revisions, Memory entry
versions) through their stored lineage, within the run's budget, and gives a content-free
manifest the run pins plus the bounded evidence shown to the model. Everything here is pure:
every read goes through the ``EvidenceReader`` port, nothing touches a clock, a store or the
network, and the same world always gives the same answer.

Modules, from the values outwards:

* ``manifest``: the value types: graph nodes, root groups, the pinned ``EvidenceManifest`` and
  the model-visible ``ModelEvidence``, with the node kinds and roles.
* ``limits``: the budget limits of a resolution and the over-limit errors.
* ``graph``: the graph a walk builds, reachability over its edges, and root groups (origins).
* ``references``: reading and validating one reference against its stored aggregate.
* ``presentation``: turning the graph into the ``ModelEvidence``.
* ``pinning``: proving the current world still matches a pinned manifest.
* ``resolution``: the ``EvidenceReader`` port, the bounded traversal and ``resolve``.
* ``selection``: mapping the evidence a model used back to a Candidate's lineage, and the
  re-validation of a lineage for review.

Evidence ids are deterministic and live with the other identifiers in ``domain.ids``.
"""
