"""The build side: pinned downloads, laid-out trees and their proof, patched wheels, an environment's check;
it uses the engine and never `maint`. (Not named `build`: linters and packagers skip folders of that name.)"""
