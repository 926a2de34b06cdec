"""POST /slack/interactions: Slack-style block_actions callbacks."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from approvals import slack

logger = logging.getLogger(__name__)
MAX_BODY = 64 * 1024


@csrf_exempt  # authenticated by Slack's request signature instead
@require_POST
def interactions(request: HttpRequest) -> HttpResponse:
    body = request.body[: MAX_BODY + 1]
    if len(body) > MAX_BODY:
        return JsonResponse({"error": {"message": "body too large"}}, status=413)
    try:
        slack.verify(
            body=body,
            timestamp=request.headers.get("X-Slack-Request-Timestamp", ""),
            signature=request.headers.get("X-Slack-Signature", ""),
        )
    except slack.CallbackRefused as exc:
        logger.warning("slack callback refused: %s", exc)
        return JsonResponse({"error": {"message": f"refused: {exc}"}}, status=401)
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=False)
        click = slack.parse_click((form.get("payload") or [""])[0])
    except (UnicodeDecodeError, slack.BadPayload) as exc:
        field = "payload" if isinstance(exc, UnicodeDecodeError) else None
        message = str(exc) if not field else "payload is not UTF-8 form data"
        return JsonResponse({"error": {"message": message}}, status=400)
    card, result = slack.decide_click(click)
    if click.response_url and card is not None:
        from approvals.tasks import slack_respond

        message = slack.outcome_message(card, result)
        transaction.on_commit(lambda: slack_respond.delay(click.response_url, message), robust=True)
    # Slack wants an answer within 3 seconds; the message edit follows through response_url.
    return HttpResponse(status=200)
