"""/admin/oidc/: the operators' sign-in with the identity provider (orquestador/signin.py). The
names are the library's own, which its session refresh looks up."""

from django.urls import path

from . import signin

urlpatterns = [
    path("authenticate/", signin.AuthenticationRequest.as_view(), name="oidc_authentication_init"),
    path("callback/", signin.AuthenticationCallback.as_view(), name="oidc_authentication_callback"),
]
