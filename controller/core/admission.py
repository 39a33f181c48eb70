"""What every admission webhook of ours (the eviction gate, the grace webhook) reads and writes
of an AdmissionReview (admission.k8s.io/v1), and nothing else: no I/O."""

from __future__ import annotations

from collections.abc import Mapping

REVIEW_VERSION = "admission.k8s.io/v1"


def review_request(review: object) -> Mapping:
    """The review's request. ValueError when ``review`` is not an AdmissionReview with a request
    that has a uid (the server answers 400)."""
    if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
        raise ValueError("not an AdmissionReview with a request")
    req = review["request"]
    if not isinstance(req.get("uid"), str):
        raise ValueError("request.uid missing")
    return req


def review_response(response: Mapping) -> dict:
    """An AdmissionReview carrying ``response`` (which holds the request's uid)."""
    return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": dict(response)}
