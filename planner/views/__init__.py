"""What a person sees: rich tables and JSON shaping (`report`, `serve_report`), pictures
(`pictures`), the HTML page (`html`). Nothing here computes an estimate."""
