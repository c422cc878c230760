#!/usr/bin/python3
"""Serves the clip viewer (this folder) and the clips to show, on loopback, and prints its URL.

    clients/web/serve.py [--port N] [--bind ADDR] [A.glb [B.glb]]

The viewer is at / (index.html, viewer.js, node_modules/three); each FILE given is at
/clips/I/NAME, and the printed URL opens them side by side (?a=...&b=...). --port 0 (the
default) picks a free port. Stops on Ctrl-C. Only the viewer's folder and the named files are
served. On a loopback address, requests must name a loopback host (Host: localhost, 127.0.0.1,
[::1]): a web page whose name an attacker points at 127.0.0.1 (DNS rebinding) cannot read the clips.
"""
import argparse
import functools
import ipaddress
import http.server
import os
import re
import socket
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      '.js': 'text/javascript', '.mjs': 'text/javascript', '.glb': 'model/gltf-binary',
                      '.gltf': 'model/gltf+json'}
    clips = []
    loopback_only = False  # refuse Host names that are not loopback (set when bound to loopback)

    def _host_allowed(self):
        if not self.loopback_only:
            return True
        try:  # a malformed Host ('[') is not loopback (it raised in the handler until 2026-12-03)
            host = urllib.parse.urlsplit('//' + (self.headers.get('Host') or '')).hostname or ''
        except ValueError:
            return False
        if host == 'localhost':
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def send_head(self):
        if not self._host_allowed():
            self.send_error(403, 'Host header names no loopback address (serve.py serves loopback clients only)')
            return None
        return super().send_head()

    def translate_path(self, path):
        parts = urllib.parse.unquote(urllib.parse.urlsplit(path).path).split('/')
        # ASCII digits only: str.isdigit() takes '²', which int() refuses (a traceback until 2026-12-03).
        if len(parts) == 4 and parts[1] == 'clips' and re.fullmatch('[0-9]{1,4}', parts[2]) and \
                int(parts[2]) < len(self.clips):
            clip = self.clips[int(parts[2])]
            if parts[3] == os.path.basename(clip):
                return clip
            return os.path.join(HERE, 'no such clip')
        return super().translate_path(path)

    def log_message(self, fmt, *args):  # quiet unless asked
        if os.environ.get('SINEW_WEB_LOG'):
            super().log_message(fmt, *args)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--port', type=int, default=0, help='TCP port (0: a free one)')
    ap.add_argument('--bind', default='127.0.0.1', help='address to listen on (default loopback)')
    ap.add_argument('files', nargs='*', help='up to two .glb clips to open side by side')
    a = ap.parse_args()
    if len(a.files) > 2:
        ap.error('at most two clips (A and B)')
    for f in a.files:
        if not os.path.isfile(f):
            ap.error(f'{f}: no such file')
    if not os.path.isdir(os.path.join(HERE, 'node_modules', 'three')):
        sys.exit(f'serve.py: {HERE}/node_modules/three is missing: run scripts/install-deps.sh')
    Handler.clips = [os.path.abspath(f) for f in a.files]
    try:
        Handler.loopback_only = ipaddress.ip_address(a.bind).is_loopback
    except ValueError:
        Handler.loopback_only = a.bind == 'localhost'
    if not Handler.loopback_only:
        print(f'serve.py: --bind {a.bind}: serving the viewer and the clips to every host that reaches this address, '
              'with no Host check', file=sys.stderr, flush=True)

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ':' in a.bind else socket.AF_INET

    server = Server((a.bind, a.port), functools.partial(Handler, directory=HERE))
    host, port = server.server_address[:2]
    if host in ('0.0.0.0', '::'):  # every address: the URL names this machine's loopback
        host = '127.0.0.1' if host == '0.0.0.0' else '::1'
    # Each clip's path is quoted as a path (the server unquotes it), then as a query value (the
    # viewer's URLSearchParams unquotes that): a name with '#', '?' or '%' reaches the server
    # whole (until 2026-12-03 it was quoted once, and '#' cut the path short).
    query = '&'.join(f'{k}=' + urllib.parse.quote(f'/clips/{i}/{urllib.parse.quote(os.path.basename(f))}', safe='/')
                     for i, (k, f) in enumerate(zip('ab', a.files)))
    shown = f'[{host}]' if ':' in host else host
    print(f'viewer: http://{shown}:{port}/index.html' + (f'?{query}' if query else ''), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == '__main__':
    main()
