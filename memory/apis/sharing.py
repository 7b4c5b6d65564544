"""The end user's own sharing decisions (Django session login; no agent key can reach these)."""

from __future__ import annotations

from typing import Any, NoReturn

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import StrictSerializer
from memory.apis.errors import USER_ERRORS
from memory.models import ConsentRole, ConsentState, SharingRequest
from memory.sharing import grant_revoke, requests_for_user, sharing_request_decide_as_source


class UserApi(APIView):
    # For a person signed in to Engram (Django's session login). Any other caller, an agent's API key
    # included (it is not read here), is unauthenticated: 403 unauthenticated, as session
    # authentication has no challenge to send with a 401. (A comment: a docstring would become the
    # description of every operation that has none of its own.)

    authentication_classes = [SessionAuthentication]
    permission_classes = [IsAuthenticated]

    def permission_denied(self, request: Request, message: str | None = None, code: str | None = None) -> NoReturn:
        if not request.successful_authenticator:
            raise exceptions.NotAuthenticated(
                "sign in to Engram as yourself: these endpoints take a signed-in person's session, "
                "never an agent's API key"
            )
        super().permission_denied(request, message, code)

    def user(self, request: Request) -> AbstractBaseUser:
        user = request.user
        assert isinstance(user, AbstractBaseUser)
        return user


class ConsentOut(serializers.Serializer[Any]):
    actor_id = serializers.IntegerField()
    label = serializers.CharField()  # type: ignore[assignment]  # the field, not Field.label
    role = serializers.ChoiceField(choices=ConsentRole.choices, help_text="source: said it; subject: it is about them.")
    state = serializers.ChoiceField(choices=ConsentState.choices)


class SharingRequestOut(serializers.Serializer[Any]):
    request_id = serializers.IntegerField()
    id = serializers.CharField()
    statement = serializers.CharField()
    conversation = serializers.CharField()
    state = serializers.CharField()
    consents = ConsentOut(
        many=True, help_text="Everyone whose consent the request needs: it is granted when all have given it."
    )


class DecisionIn(StrictSerializer):
    approve = serializers.BooleanField()


class DecisionOut(serializers.Serializer[Any]):
    request_id = serializers.IntegerField()
    state = serializers.CharField()
    grant_id = serializers.IntegerField(allow_null=True)


class MySharingRequestsApi(UserApi):
    @extend_schema(
        operation_id="me_sharing_requests_list",
        summary="Sharing requests awaiting my answer",
        responses={200: SharingRequestOut(many=True), **USER_ERRORS},
    )
    def get(self, request: Request) -> Response:
        rows = [
            {
                "request_id": r.pk,
                "id": r.revision.short_id,
                "statement": r.revision.body,
                "conversation": str(r.conversation),
                "state": r.state,
                "consents": [
                    {"actor_id": c.actor_id, "label": c.actor.label, "role": c.role, "state": c.state}
                    for c in r.consents.all()
                ],
            }
            for r in requests_for_user(self.user(request))
        ]
        return Response(SharingRequestOut(rows, many=True).data)


class MySharingDecisionApi(UserApi):
    @extend_schema(
        operation_id="me_sharing_requests_decide",
        summary="Answer a sharing request about something I said or that is about me",
        description="Each person the request asks (everyone whose words the memory rests on, and the person it "
        "is about), logged in as that actor, gives or refuses their own consent. One refusal denies the request; "
        "the last consent given creates a revocable grant, and until then the request stays pending. Agents "
        "cannot call this endpoint.",
        request=DecisionIn,
        responses={200: DecisionOut, **USER_ERRORS},
    )
    def post(self, request: Request, request_id: int) -> Response:
        payload = DecisionIn(data=request.data)
        payload.is_valid(raise_exception=True)
        approve = payload.validated_data["approve"]
        grant = sharing_request_decide_as_source(request_id=request_id, user=self.user(request), approve=approve)
        state = SharingRequest.objects.filter(pk=request_id).values_list("state", flat=True).get()
        body = {"request_id": request_id, "state": state, "grant_id": grant.pk if grant else None}
        return Response(DecisionOut(body).data)


class GrantOut(serializers.Serializer[Any]):
    grant_id = serializers.IntegerField()
    revoked = serializers.BooleanField()


class MyGrantRevokeApi(UserApi):
    @extend_schema(
        operation_id="me_grants_revoke",
        summary="Revoke a grant I gave",
        request=None,
        responses={200: GrantOut, **USER_ERRORS},
    )
    def post(self, request: Request, grant_id: int) -> Response:
        grant = grant_revoke(grant_id=grant_id, user=self.user(request))
        return Response(GrantOut({"grant_id": grant.pk, "revoked": grant.revoked_at is not None}).data)
