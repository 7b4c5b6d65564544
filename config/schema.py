"""OpenAPI schema adjustments, so the published contract is exactly what the API enforces."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent


class StrictSerializerExtension(OpenApiSerializerExtension):
    """Strict request serializers refuse unknown fields, so their schemas say ``additionalProperties: false``."""

    target_class = "config.api.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        return schema

    def get_name(self, auto_schema: Any, direction: str) -> str | None:
        return None  # the default component name

    def get_identity(self, auto_schema: Any, direction: str) -> Any:
        return None


__all__ = ["ResolvedComponent", "StrictSerializerExtension"]
