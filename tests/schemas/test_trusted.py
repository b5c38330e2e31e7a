"""Views made without validation (schemas.trusted) read exactly as validated ones do: the
same fields in the same order (the JSON and its ETag follow it), and a field left out or one
too many is refused at once instead of making a view that lacks it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpulease.schemas import InstanceNodeView, StageView, trusted


def test_a_trusted_view_is_the_validated_one_whatever_the_order_given() -> None:
    values = {"gpus": [0, 1], "ip_address": "10.0.0.5", "stage": None, "status": "rented",
              "name": "gpu-01", "id": "n-1", "ssh_command": "ssh root@10.0.0.5"}
    made = trusted(InstanceNodeView, **values)
    checked = InstanceNodeView.model_validate(values)
    assert made == checked
    assert made.model_dump_json() == checked.model_dump_json()
    assert list(made.model_dump()) == list(InstanceNodeView.model_fields)
    stage = trusted(StageView, phrase=None, message="m", node=None, stage="deploy",
                    at=datetime(2026, 12, 2, tzinfo=UTC))
    assert stage.model_dump_json() == StageView(
        stage="deploy", at=datetime(2026, 12, 2, tzinfo=UTC), message="m").model_dump_json()


def test_a_field_left_out_or_one_too_many_is_refused() -> None:
    with pytest.raises(TypeError, match="takes"):
        trusted(InstanceNodeView, id="n-1", name="gpu-01")
    with pytest.raises(TypeError, match="takes"):
        trusted(InstanceNodeView, id="n-1", name="gpu-01", status="rented", stage=None,
                ip_address=None, gpus=[], ssh_command=None, extra=1)
    with pytest.raises(KeyError):
        trusted(InstanceNodeView, id="n-1", name="gpu-01", status="rented", stage=None,
                ip_address=None, ssh_command=None, gpu=[])  # a misspelt field
