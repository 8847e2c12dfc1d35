"""Run reports: one self-contained HTML page (figures embedded as base64 PNG) plus Markdown.

`sage.reporting.run_report.build_report(run_dir)` reads questions.csv, summary.json, responses.csv
and correlation/correlation.json of a run directory; nothing heavy is imported here.
"""
