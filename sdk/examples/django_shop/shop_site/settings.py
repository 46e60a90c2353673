"""The shop's settings, read from the environment: ``DATABASE_URL`` (the business database,
where ``orbit_outbox`` lives too), ``ORBIT_URL`` (one URL or several, comma-separated) and
``ORBIT_API_KEY``, ``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG``, ``DJANGO_ALLOWED_HOSTS``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.management.utils import get_random_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent


def database_from_url(url: str) -> dict[str, Any]:
    """Django's ``DATABASES`` entry for ``sqlite:///path``, ``postgresql://…`` or
    ``mysql://…`` (the URLs ``orbit-outbox-relay --database-url`` takes as well)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parts.path[1:])}
    engines = {"postgresql": "postgresql", "postgres": "postgresql", "mysql": "mysql"}
    return {
        "ENGINE": f"django.db.backends.{engines[parts.scheme]}",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or get_random_secret_key()
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")
INSTALLED_APPS = ["orders"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
]
ROOT_URLCONF = "shop_site.urls"
WSGI_APPLICATION = "shop_site.wsgi.application"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'shop.sqlite3'}")
DATABASES = {"default": database_from_url(DATABASE_URL)}

ORBIT_URL = os.environ.get("ORBIT_URL", "http://127.0.0.1:7070")
ORBIT_API_KEY = os.environ.get("ORBIT_API_KEY") or None
