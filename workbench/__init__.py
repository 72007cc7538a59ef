"""The Streamlit workbench's own code: what the pages show, computed outside the pages.

``views`` holds plain functions (no Streamlit) for figures soap_core does not give
directly; ``loading`` holds the cached, Streamlit-side access to the store.
"""
