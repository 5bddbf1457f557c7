"""Sandbox images: Jinja2 templates for Apptainer definition files and Dockerfiles, built with caching."""
