from django.apps import AppConfig


class PagesConfig(AppConfig):
    name = "pages"
    verbose_name = "The end user's pages"
