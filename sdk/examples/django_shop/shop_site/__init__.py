"""The Django project of the shop recipe (docs/recipes/django.md)."""
