#!/usr/bin/env node
import '../dist/tools/quantize-cli.js';
