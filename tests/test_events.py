"""Events as they are written down: encode and decode, and the schema decode enforces."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontemp.journal import KINDS, Event, RuleViolation, SessionTempError, decode, encode
from sessiontemp.journal.events import (
    ArtifactKept,
    LeaseAcquired,
    ManagerOpened,
    SessionAdopted,
    SessionClaimed,
)
from tests.strategies import (
    EVENT_CLASSES,
    FIELD_EXAMPLES,
    event_fields,
    events,
    events_of,
    scaled,
    wrong_values_for,
)

seqs = st.integers(min_value=1, max_value=2**63 - 1)


def assert_violation_names(seq: int, excinfo: pytest.ExceptionInfo[RuleViolation]) -> None:
    assert excinfo.value.seq == seq
    assert str(excinfo.value).startswith(f"event {seq} ")


def example(cls: type[Event]) -> Event:
    """A fixed event of class *cls*."""
    values: dict[str, Any] = {
        name: FIELD_EXAMPLES.get(name, 7 if typ is int else "x")
        for name, typ in event_fields(cls).items()
    }
    return cls(**values)


def payload_of(event: Event) -> dict[str, Any]:
    fields = json.loads(encode(event)[1])
    assert isinstance(fields, dict)
    return fields


# -- the kinds -------------------------------------------------------------------------


def test_every_event_class_is_registered_under_its_own_kind() -> None:
    assert len(KINDS) == 22
    for kind, cls in KINDS.items():
        assert cls.kind == kind


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.kind)
def test_every_event_is_frozen(cls: type[Event]) -> None:
    event = example(cls)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(event, attrs.fields(cls)[0].name, "changed")


# -- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.kind)
@scaled(0.2)
@given(data=st.data(), seq=seqs)
def test_decode_gives_back_what_encode_wrote_for_every_kind(
    cls: type[Event], data: st.DataObject, seq: int
) -> None:
    event = data.draw(events_of(cls))
    kind, payload = encode(event)
    decoded = decode(seq, kind, payload)
    assert decoded == event
    assert type(decoded) is cls


@given(event=events())
def test_encode_writes_the_kind_and_exactly_the_fields_as_a_json_object(event: Event) -> None:
    kind, payload = encode(event)
    assert kind == event.kind
    assert json.loads(payload) == attrs.asdict(event)


def any_values_of(cls: type[Event]) -> st.SearchStrategy[Event]:
    """An event of *cls* with any text and any integer in its fields, and sometimes a value
    of another JSON type (which attrs does not stop)."""
    others = st.one_of(st.booleans(), st.none(), st.floats(allow_nan=False))
    return st.builds(cls, **{
        name: st.one_of(st.text() if typ is str else st.integers(), others)
        for name, typ in event_fields(cls).items()})


@given(event=st.sampled_from(EVENT_CLASSES).flatmap(any_values_of))
def test_encode_writes_the_payload_json_dumps_writes_with_sorted_keys_byte_for_byte(
    event: Event,
) -> None:
    # The digest chain covers the payload: journals written by json.dumps
    # and by encode's own writer must chain alike.
    _, payload = encode(event)
    assert payload == json.dumps(attrs.asdict(event), separators=(",", ":"), sort_keys=True)


@given(event=events())
def test_encode_is_deterministic_and_independent_of_field_order(event: Event) -> None:
    # The payload is part of the digest chain: the same event must always
    # give the same bytes.
    _, payload = encode(event)
    assert encode(attrs.evolve(event)) == encode(event)
    assert payload == json.dumps(json.loads(payload), separators=(",", ":"), sort_keys=True)


# -- what decode refuses ---------------------------------------------------------------


@given(seq=seqs, kind=st.text().filter(lambda k: k not in KINDS), event=events())
def test_decode_rejects_a_kind_it_does_not_know_naming_the_seq(
    seq: int, kind: str, event: Event
) -> None:
    with pytest.raises(RuleViolation) as excinfo:
        decode(seq, kind, encode(event)[1])
    assert_violation_names(seq, excinfo)


@pytest.mark.parametrize(
    "payload", ["", "{", "{'manager': 'm'}", '{"manager": m}', "nan", "{} x", "\x00"]
)
@scaled(0.1)
@given(seq=seqs)
def test_decode_rejects_a_payload_that_is_not_json_naming_the_seq(
    payload: str, seq: int
) -> None:
    with pytest.raises(RuleViolation) as excinfo:
        decode(seq, "retain", payload)
    assert_violation_names(seq, excinfo)


@given(seq=seqs, cls=st.sampled_from(EVENT_CLASSES), value=st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(), st.lists(st.text(), max_size=3)
))
def test_decode_rejects_json_that_is_not_an_object_naming_the_seq(
    seq: int, cls: type[Event], value: object
) -> None:
    with pytest.raises(RuleViolation) as excinfo:
        decode(seq, cls.kind, json.dumps(value))
    assert_violation_names(seq, excinfo)


@given(seq=seqs, data=st.data())
def test_decode_rejects_a_payload_missing_a_field_naming_the_seq(
    seq: int, data: st.DataObject
) -> None:
    event = data.draw(events())
    fields = payload_of(event)
    required = sorted(a.name for a in attrs.fields(type(event)) if a.default is attrs.NOTHING)
    del fields[data.draw(st.sampled_from(required))]
    with pytest.raises(RuleViolation) as excinfo:
        decode(seq, event.kind, json.dumps(fields))
    assert_violation_names(seq, excinfo)


def test_a_lease_journaled_before_labels_existed_decodes_with_an_empty_label() -> None:
    fields = payload_of(example(LeaseAcquired))
    del fields["label"]
    decoded = decode(3, "lease.acquired", json.dumps(fields))
    assert isinstance(decoded, LeaseAcquired)
    assert decoded.label == ""
    assert payload_of(decoded) == {**fields, "label": ""}


@pytest.mark.parametrize(("name", "value"), [
    ("manager", "../../etc"), ("manager", "0123456789ABCDEF0123456789ABCDEF"),
    ("generation", "../outside-12345"), ("generation", "abc/def/ghi23456"),
    ("generation", "abcdefghijk2345"), ("lease", "not-hex-at-all!!"),
])
def test_decode_refuses_an_id_not_in_its_canonical_form_naming_the_field(
    name: str, value: str
) -> None:
    cls = LeaseAcquired
    fields = payload_of(example(cls))
    fields[name] = value
    with pytest.raises(RuleViolation, match=f"field '{name}' that is not a canonical") as e:
        decode(9, cls.kind, json.dumps(fields))
    assert_violation_names(9, e)


def test_decode_refuses_a_pid_below_one() -> None:
    fields = payload_of(example(ManagerOpened))
    fields["pid"] = 0
    with pytest.raises(RuleViolation, match="field 'pid' that is below 1"):
        decode(4, "manager.opened", json.dumps(fields))


@given(seq=seqs, data=st.data(), value=st.one_of(st.integers(), st.text(), st.none()))
def test_decode_rejects_a_payload_with_an_extra_field_naming_the_seq(
    seq: int, data: st.DataObject, value: object
) -> None:
    event = data.draw(events())
    fields = payload_of(event)
    extra = data.draw(st.text().filter(lambda name: name not in fields))
    fields[extra] = value
    with pytest.raises(RuleViolation) as excinfo:
        decode(seq, event.kind, json.dumps(fields))
    assert_violation_names(seq, excinfo)


@given(seq=seqs, data=st.data())
def test_decode_rejects_a_payload_of_another_kind_naming_the_seq(
    seq: int, data: st.DataObject
) -> None:
    event = data.draw(events())
    keys = set(payload_of(event))

    def refuses(cls: type[Event]) -> bool:
        # A kind with an optional field takes the payload of a kind that
        # lacks only that field: not a payload of another kind, then.
        required = {a.name for a in attrs.fields(cls) if a.default is attrs.NOTHING}
        return not required <= keys <= set(event_fields(cls))

    other = data.draw(st.sampled_from(EVENT_CLASSES).filter(refuses))
    with pytest.raises(RuleViolation) as excinfo:
        decode(seq, other.kind, encode(event)[1])
    assert_violation_names(seq, excinfo)


_INT_FIELDS = [
    (cls, name) for cls in EVENT_CLASSES
    for name, typ in event_fields(cls).items() if typ is int
]
_STR_FIELDS = [
    (cls, name) for cls in EVENT_CLASSES
    for name, typ in event_fields(cls).items() if typ is str
]


@pytest.mark.parametrize(
    ("cls", "name"), _INT_FIELDS, ids=[f"{c.kind}.{n}" for c, n in _INT_FIELDS]
)
@pytest.mark.parametrize("value", [True, False])
def test_decode_rejects_a_bool_where_an_int_belongs(
    cls: type[Event], name: str, value: bool
) -> None:
    fields = payload_of(example(cls))
    fields[name] = value
    with pytest.raises(RuleViolation) as excinfo:
        decode(12, cls.kind, json.dumps(fields))
    assert_violation_names(12, excinfo)


@pytest.mark.parametrize(
    ("cls", "name"), _STR_FIELDS, ids=[f"{c.kind}.{n}" for c, n in _STR_FIELDS]
)
@pytest.mark.parametrize("value", [0, 7, -1])
def test_decode_rejects_an_int_where_a_str_belongs(cls: type[Event], name: str, value: int) -> None:
    fields = payload_of(example(cls))
    fields[name] = value
    with pytest.raises(RuleViolation) as excinfo:
        decode(13, cls.kind, json.dumps(fields))
    assert_violation_names(13, excinfo)


@given(seq=seqs, data=st.data())
def test_decode_rejects_any_value_of_the_wrong_type_naming_the_seq(
    seq: int, data: st.DataObject
) -> None:
    event = data.draw(events())
    fields = payload_of(event)
    name, typ = data.draw(st.sampled_from(sorted(event_fields(type(event)).items())))
    fields[name] = data.draw(wrong_values_for(typ))
    with pytest.raises(RuleViolation) as excinfo:
        decode(seq, event.kind, json.dumps(fields))
    assert_violation_names(seq, excinfo)


def test_a_rule_violation_is_a_value_error_of_the_library() -> None:
    with pytest.raises(RuleViolation) as excinfo:
        decode(5, "no.such.kind", "{}")
    assert isinstance(excinfo.value, ValueError)
    assert isinstance(excinfo.value, SessionTempError)


@pytest.mark.parametrize(("cls", "name", "value", "rule"), [
    (SessionClaimed, "session", "..", "session name"),
    (SessionClaimed, "session", "a/b", "session name"),
    (SessionClaimed, "session", "x" * 65, "session name"),
    (SessionAdopted, "previous", "../../etc", "canonical manager id"),
    (ArtifactKept, "label", "../escape", "artifact label"),
    (ArtifactKept, "label", ".lock", "artifact label"),
    (ArtifactKept, "label", "x" * 81, "artifact label"),
    (ArtifactKept, "artifact", "ABCDEF0123456789", "canonical artifact id"),
    (ArtifactKept, "sha256", "0" * 63, "SHA-256 digest"),
    (ArtifactKept, "size", -1, "below 0"),
    (SessionClaimed, "window_ms", -1, "below 0"),
])
def test_decode_refuses_a_session_or_artifact_field_that_could_end_up_in_a_path(
    cls: type[Event], name: str, value: object, rule: str
) -> None:
    # Session names and artifact labels become file names under the root.
    fields = payload_of(example(cls))
    fields[name] = value
    with pytest.raises(RuleViolation, match=f"field '{name}' that .*{rule}") as e:
        decode(21, cls.kind, json.dumps(fields))
    assert_violation_names(21, e)
