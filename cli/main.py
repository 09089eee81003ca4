"""`eyas`: run the control plane and talk to it."""

from __future__ import annotations

import typer

from cli import checkpoints, launch, local, pipelines, remote

app = typer.Typer(
    no_args_is_help=True, add_completion=True, help="eyas: train EAGLE-3 drafters, serve them with SGLang."
)
db = typer.Typer(no_args_is_help=True, help="database schema")
token = typer.Typer(no_args_is_help=True, help="API tokens")

app.command()(local.up)
app.command()(local.api)
app.command()(local.worker)
app.command()(remote.submit)
app.command()(remote.status)
app.command()(remote.wait)
app.command()(remote.cancel)
app.command()(remote.hosts)
app.command()(remote.logs)
app.command()(remote.compare)
app.command()(checkpoints.doctor)
app.command("fix-keys")(checkpoints.fix_keys)
app.command()(launch.launch)
token.command("create")(remote.token_create)
token.command("bootstrap")(local.token_bootstrap)
token.command("list")(remote.token_list)
token.command("revoke")(remote.token_revoke)
app.command()(pipelines.demo)
app.add_typer(pipelines.pipeline, name="pipeline")
app.add_typer(db, name="db")
app.add_typer(token, name="token")


@db.command("upgrade")
def db_upgrade() -> None:
    """Migrate the database to the newest schema."""
    from app.core.config import get_settings

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    local.db_upgrade(settings)
    typer.echo(f"database at head: {settings.resolved_database_url().split('@')[-1]}")


if __name__ == "__main__":
    app()
