import io
from pathlib import Path

import pytest
from django.core.management import call_command

from executions.models import Flow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.django_db
def test_loadflow__publishes_then_reports_unchanged():
    out = io.StringIO()
    call_command("loadflow", str(EXAMPLES / "onboarding.json"), stdout=out)
    call_command("loadflow", str(EXAMPLES / "onboarding.json"), stdout=out)
    assert out.getvalue().splitlines() == ["published onboarding@1", "unchanged onboarding@1"]
    assert Flow.objects.filter(key="onboarding").count() == 1
