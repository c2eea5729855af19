"""Placeholder printer; replaced by the full printer."""
def expr_to_str(e):
    return type(e).__name__
def stmt_to_str(s):
    return type(s).__name__
def func_to_str(f):
    return f.name
def to_html(text):
    return "<pre>" + text + "</pre>"
