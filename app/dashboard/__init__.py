"""The web dashboard served by the API at `/`: static HTML, CSS and JavaScript, no build step."""
