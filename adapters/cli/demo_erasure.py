"""The demo's forgetting step: a customer is recorded, built on, and forgotten.

A support call is recorded for the data subject ``customer-4711``, and a Candidate is proposed
from it. Then a deployment administrator erases the subject: the Source's key is destroyed in
the transaction that records the erasure, the Source reads as erased, and the Candidate is
listed as derived from erased evidence, flagged in the review inbox (docs/erasure.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters.api.erasures import derived_from
from adapters.store.projection_runtime import RunningProjection
from application.bootstrap import Dreaming
from application.erasure import ErasureTarget
from domain.policy import LOCAL
from domain.refs import Lineage, SourceRef
from projections.provenance import ProvenanceView
from projections.review_inbox import ReviewInboxView

SUBJECT = "customer-4711"
CALL = SourceRef("support", "call-9")
CANDIDATE = "callback-window"
LESSON = {"situation": "A customer asked to be called back outside office hours",
          "action": "Offered the next morning slot", "outcome": "The call happened",
          "lesson": "Offer the next morning slot for out-of-hours callbacks"}


def forget_a_customer(app: Dreaming, scope_id: str,
                      provenance: RunningProjection[ProvenanceView],
                      inbox: RunningProjection[ReviewInboxView]) -> dict[str, Any]:
    app.records.record_source(LOCAL, scope_id, CALL.source_type, CALL.source_id,
                              text="Dana Example (dana@example.invalid) asked for a callback "
                                   "after 6 pm; offered 8 am the next day, which worked.",
                              subject=SUBJECT)
    app.review.propose_candidate(LOCAL, scope_id, CANDIDATE, "experience", LESSON,
                                 Lineage(sources=(CALL,)), "seen in support call 9")
    provenance.catch_up()
    erased = app.erasures.erase(
        LOCAL, scope_id, ErasureTarget.of_subject(SUBJECT), "the customer asked to be forgotten",
        lambda scope, records: derived_from(provenance.view, scope, records))
    provenance.catch_up()
    inbox.catch_up()
    source = app.records.get_source(LOCAL, scope_id, CALL.source_type, CALL.source_id)
    flagged = inbox.view.get_candidate_summary(scope_id, CANDIDATE)
    return {"erasure_id": erased.value.erasure.erasure_id, "subject": SUBJECT,
            "records": erased.value.erasure.records, "derived": erased.value.erasure.derived,
            "scrubbed": erased.value.scrubbed,
            "source_after": {"erased": source.erased, "text": source.text,
                             "content_hash": source.content_hash},
            "candidate_flagged": flagged is not None and flagged.evidence_erased}


def render_erasure(report: dict[str, Any], write: Callable[[str], None]) -> None:
    write(f"\nForgetting {report['subject']} (erasure {report['erasure_id']}):")
    for record in report["records"]:
        write(f"  erased {record['kind']} {record.get('source_type', '')}/"
              f"{record.get('source_id', record.get('entry_id', ''))}, its key destroyed; "
              f"kept: {record.get('content_hash', '')[:23]}…")
    after = report["source_after"]
    write(f"  the Source now reads erased={after['erased']}, text={after['text']!r}")
    for item in report["derived"]:
        write(f"  derived from it, for review: {item['kind']} {item['key']}")
    write(f"  the Candidate is flagged in the inbox: {report['candidate_flagged']}")
