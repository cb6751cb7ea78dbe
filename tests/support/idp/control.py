"""Changes to the test provider's directory, run in its own settings by IdentityProvider.control:
users and their groups, the admin's sign-in client, API clients with their tenant."""

import argparse
import os
import sys

import django


def main(argv: list[str]) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.support.idp.settings"
    django.setup()
    from django.contrib.auth.models import Group, User
    from oauth2_provider.models import Application

    from .models import ClientClaims

    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    user = commands.add_parser("user")  # create or update; its groups become exactly these
    user.add_argument("username")
    user.add_argument("password")
    user.add_argument("--email", default="")
    user.add_argument("--group", action="append", default=[])
    user.add_argument("--inactive", action="store_true")  # disabled: a departed employee
    web = commands.add_parser("web-client")  # confidential, authorization code (PKCE required)
    web.add_argument("client_id")
    web.add_argument("secret")
    web.add_argument("redirect_uri")
    service = commands.add_parser("service-client")  # client credentials, for API tokens
    service.add_argument("client_id")
    service.add_argument("secret")
    service.add_argument("tenant")
    args = parser.parse_args(argv)

    if args.command == "user":
        account, created = User.objects.get_or_create(username=args.username)
        if created:  # a new password would end the user's session at the provider
            account.set_password(args.password)
            account.email = args.email
            account.save()
        account.groups.set([Group.objects.get_or_create(name=name)[0] for name in args.group])
        if account.is_active == args.inactive:
            account.is_active = not args.inactive
            account.save(update_fields=["is_active"])
        print(account.pk)  # the `sub` of its tokens
    elif args.command == "web-client":
        Application.objects.create(
            name="orquestador admin",
            client_id=args.client_id,
            client_secret=args.secret,
            client_type=Application.CLIENT_CONFIDENTIAL,
            authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
            redirect_uris=args.redirect_uri,
            algorithm=Application.RS256_ALGORITHM,
            skip_authorization=True,  # a first-party client: no consent screen
        )
    else:
        application = Application.objects.create(
            name=f"API client of {args.tenant}",
            client_id=args.client_id,
            client_secret=args.secret,
            client_type=Application.CLIENT_CONFIDENTIAL,
            authorization_grant_type=Application.GRANT_CLIENT_CREDENTIALS,
            algorithm=Application.RS256_ALGORITHM,
        )
        ClientClaims.objects.create(application=application, tenant=args.tenant)


if __name__ == "__main__":
    main(sys.argv[1:])
