"""Pydantic request and response models; the OpenAPI document is generated from them.

Limits that depend on the configuration (batch size, text lengths) are built into the models
by :func:`make_schemas`, so they appear in the OpenAPI document and a client (or a fuzzer)
can see them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

from forkgym.verifiers import Status

from .config import ServiceConfig

__all__ = [
    "ID_PATTERN",
    "ErrorResponse",
    "Health",
    "OutcomePage",
    "OutcomeRecord",
    "Schemas",
    "StatsResponse",
    "make_schemas",
]

ID_PATTERN = r"^[A-Za-z0-9._:@+=\-]{1,128}$"
StatusName = Literal[tuple(s.value for s in Status)]  # type: ignore[valid-type]


def _valid_unicode(text: str) -> str:
    """Refuse lone surrogates: they cannot be stored or sent back as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"text is not valid Unicode (a lone surrogate at position {exc.start})"
        ) from None
    return text


Identifier = Annotated[str, Field(pattern=ID_PATTERN), AfterValidator(_valid_unicode)]


class OutcomeRecord(BaseModel):
    """A recorded outcome: what was graded, the verdict, and how it was recorded."""

    id: str
    status: StatusName
    reward: float | None = Field(description="None exactly for timeout and error")
    extracted: str | None
    latency_ms: float
    verifier: str
    verifier_version: str
    details: dict[str, Any]
    run_id: str | None
    task_id: str | None
    idempotency_key: str | None
    request_id: str
    response_sha256: str
    response_chars: int
    created_at: datetime
    replayed: bool = Field(
        default=False, description="True when this item was recorded by an earlier request"
    )


class OutcomePage(BaseModel):
    items: list[OutcomeRecord]
    next_after: int | None = Field(description="cursor for the next page; None on the last page")


class StatsResponse(BaseModel):
    total: int
    counts: dict[str, int]
    latency_ms: dict[str, float | None]
    writer_pending: int
    writer_commits: int


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    verifier_version: str


class ErrorResponse(BaseModel):
    detail: Any


@dataclass(frozen=True)
class Schemas:
    VerifyRequest: type[BaseModel]
    BatchRequest: type[BaseModel]
    BatchResponse: type[BaseModel]
    RewardRequest: type[BaseModel]


class RewardResponse(BaseModel):
    """What OpenRLHF's remote reward client reads (``scores``, else ``rewards``, and
    ``extra_logs``), with forkgym's statuses and outcome ids."""

    rewards: list[float] = Field(description="one float per sample, in order")
    scores: list[float] = Field(description="the same numbers (newer OpenRLHF reads this key)")
    extra_logs: dict[str, list[float]] = Field(
        description="per sample, 1.0 under its status's key (status_correct, status_incorrect, "
        "status_invalid, status_truncated, status_timeout, status_error), else 0.0: OpenRLHF "
        "logs each key (it turns every value into a tensor, so they are numbers)"
    )
    statuses: list[str] = Field(description="forkgym's status of each sample")
    ids: list[str] = Field(description="the recorded outcome ids, for /v1/outcomes/{id}")


def make_schemas(config: ServiceConfig) -> Schemas:
    """Request models whose limits are those of ``config``."""
    reference = Annotated[
        str,
        Field(
            min_length=1, max_length=config.max_reference_chars, description="the reference answer"
        ),
        AfterValidator(_valid_unicode),
    ]
    response = Annotated[
        str,
        Field(max_length=config.max_response_chars, description="the model's response"),
        AfterValidator(_valid_unicode),
    ]
    task = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_valid_unicode)]
    verify_request = create_model(
        "VerifyRequest",
        __config__=ConfigDict(extra="forbid"),
        reference=(reference, ...),
        response=(response, ...),
        id=(
            Identifier | None,
            Field(None, description="outcome id; default: the idempotency key, else a new UUID"),
        ),
        idempotency_key=(
            Identifier | None,
            Field(None, description="a retry with the same key returns the recorded outcome"),
        ),
        run_id=(Identifier | None, None),
        task_id=(task | None, None),
    )
    batch_request = create_model(
        "BatchRequest",
        __config__=ConfigDict(extra="forbid"),
        items=(list[verify_request], Field(min_length=1, max_length=config.max_batch)),  # type: ignore[valid-type]
    )
    batch_response = create_model("BatchResponse", outcomes=(list[OutcomeRecord], ...))
    texts = Field(min_length=1, max_length=config.max_batch)
    reward_request = create_model(
        "RewardRequest",
        __config__=ConfigDict(extra="allow"),  # OpenRLHF may send more keys; they are ignored
        query=(
            list[
                Annotated[
                    str,
                    Field(max_length=config.max_response_chars + config.max_reference_chars),
                    AfterValidator(_valid_unicode),
                ]
            ],
            texts,
        ),
        prompts=(list[Annotated[str, AfterValidator(_valid_unicode)]] | None, None),
        # OpenRLHF sends its dataset's label column as it is: text, a number, null ("" without
        # --label_key), or whatever else the column holds (a list, a bool, an object). A label
        # that cannot be graded against is that one sample's `invalid`, never the batch's 422:
        # OpenRLHF retries a 422 and then trains the whole request without rewards
        labels=(list[Any], texts),
    )
    return Schemas(verify_request, batch_request, batch_response, reward_request)
